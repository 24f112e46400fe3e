"""ModelOpt static FP8 checkpoint loader (hf_quant_config.json, sharded safetensors) for Qwen3 dense models (issue 12)."""
