// Drives a running `strata serve` through the official OpenAI Node SDK.
// Usage: node client_test.mjs <base_url ending in /v1> <api_key> <model_id>
// Exits 0 when every check passes; prints one line per check.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
let failures = 0;

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

await check('models.list', async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  assert.deepEqual(ids, [model]);
});

await check('completions.create', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.ok(r.usage.prompt_tokens > 0);
});

await check('completions.create batch prompts', async () => {
  const prompts = ['Once upon a time', 'Hello'];
  const singles = [];
  for (const prompt of prompts) {
    const r = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, ignore_eos: true });
    singles.push(r.choices[0].text);
  }
  const r = await client.completions.create({ model, prompt: prompts, n: 2, max_tokens: 6, temperature: 0, ignore_eos: true });
  assert.equal(r.choices.length, 4);
  r.choices.forEach((c, i) => {
    assert.equal(c.index, i);
    assert.equal(c.text, singles[Math.floor(i / 2)]);  // prompt i / n
  });
  assert.equal(r.usage.completion_tokens, 24);
  const stream = await client.completions.create({ model, prompt: prompts, max_tokens: 6, temperature: 0, ignore_eos: true, stream: true });
  const texts = ['', ''];
  for await (const chunk of stream) for (const c of chunk.choices) texts[c.index] += c.text;
  assert.deepEqual(texts, singles);
});

await check('completions.create echo with logprobs', async () => {
  const plain = await client.completions.create({ model, prompt: 'Hello', max_tokens: 5, temperature: 0, ignore_eos: true });
  const r = await client.completions.create({ model, prompt: 'Hello', max_tokens: 5, temperature: 0, ignore_eos: true, echo: true, logprobs: 2 });
  const c = r.choices[0];
  assert.equal(c.text, 'Hello' + plain.choices[0].text);
  const lp = c.logprobs;
  assert.equal(lp.token_logprobs[0], null);  // the first prompt token has no context
  assert.equal(lp.tokens.join(''), c.text.slice(0, lp.tokens.join('').length));
  assert.ok(lp.tokens.length > 5);
  assert.equal(lp.text_offset[0], 0);
  for (let i = 1; i < lp.tokens.length; i++) {
    assert.equal(typeof lp.token_logprobs[i], 'number');
    const vals = Object.values(lp.top_logprobs[i]);
    for (let j = 1; j < vals.length; j++) assert.ok(vals[j - 1] >= vals[j], 'top_logprobs ordered by probability');
  }
  const only = await client.completions.create({ model, prompt: 'Hello', max_tokens: 0, echo: true });
  assert.equal(only.choices[0].text, 'Hello');
});

await check('chat.completions.create', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
    max_tokens: 6, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 6);
});

await check('chat.completions.create stream', async () => {
  const params = { model, messages: [{ role: 'user', content: 'Count.' }], max_tokens: 10, temperature: 0, ignore_eos: true };
  const whole = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta && c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2, `only ${chunks} chunks`);
  assert.equal(finish, 'length');
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(usage.completion_tokens, 10);
});

await check('embeddings.create', async () => {
  const r = await client.embeddings.create({ model, input: ['hello world', 'goodbye'] });
  assert.equal(r.data.length, 2);
  const v = r.data[0].embedding;
  assert.ok(v.length > 0);
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
});

await check('error: bad parameter is a 400 BadRequestError naming the param', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 8, top_p: 7 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'top_p');
});

await check('error: unknown model is a 404 NotFoundError', async () => {
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

await check('error: wrong key is a 401 AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

// logit_bias (issue 14): +100 selects the token exclusively, -100 bans it; the ids come back with
// vLLM's return_token_ids (an extra body field the SDK passes through).
await check('completions.create logit_bias', async () => {
  const base = { model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, ignore_eos: true, return_token_ids: true };
  const plain = await client.completions.create(base);
  const ids = plain.choices[0].token_ids;
  assert.equal(ids.length, 6);
  const forced = ids[0] === 300 ? 301 : 300;
  const r = await client.completions.create({ ...base, logit_bias: { [String(forced)]: 100 } });
  assert.deepEqual(r.choices[0].token_ids, Array(6).fill(forced));
  const banned = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 8, temperature: 0, ignore_eos: true,
    return_token_ids: true, logit_bias: { [String(ids[0])]: -100 },
  });
  assert.ok(!banned.choices[0].token_ids.includes(ids[0]));
  await assert.rejects(client.completions.create({ ...base, logit_bias: { '99999999': 5 } }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'logit_bias');
});

await check('error: an unsupported field (tools) is a 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Weather?' }], max_tokens: 4,
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'tools' &&
      /not supported yet/.test(e.message));
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 4, suffix: ' the end' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'suffix' && /not supported/.test(e.message));
});

console.log(failures === 0 ? 'all checks passed' : `${failures} check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
