// Prints what Hugging Face's GGUF parser (@huggingface/gguf, an implementation independent of
// ours) reads from a GGUF file, as JSON, so a test can compare it with `strata info --json`.
import { gguf } from "@huggingface/gguf";

const path = process.argv[2];
const { metadata, tensorInfos, tensorDataOffset } = await gguf(path, { allowLocalFile: true });
const norm = (v) => {
  if (typeof v === "bigint") return { kind: "int", value: v.toString() };
  if (Array.isArray(v)) return { kind: "array", length: v.length, first: v.length ? String(v[0]) : null };
  if (typeof v === "number") return { kind: "number", value: v };
  if (typeof v === "boolean") return { kind: "bool", value: v };
  return { kind: "string", value: String(v) };
};
const meta = {};
for (const [k, v] of Object.entries(metadata)) {
  if (k === "version" || k === "tensor_count" || k === "kv_count") continue;
  meta[k] = norm(v);
}
console.log(JSON.stringify({
  version: Number(metadata.version),
  tensor_count: Number(metadata.tensor_count),
  kv_count: Number(metadata.kv_count),
  data_offset: tensorDataOffset.toString(),
  metadata: meta,
  tensors: tensorInfos.map((t) => ({ name: t.name, dtype: Number(t.dtype), shape: t.shape.map(String), offset: t.offset.toString() })),
}));
