// placeholder: implemented by the kv owner
