"""SGLang as a backend (issue 14), without patching SGLang's files.

- `plugin`: the `sglang.srt.plugins` entry point. An AROUND hook on ModelOpt's static FP8
  linear routes per-tensor FP8 layers to det-suite's `fp8_linear` in deterministic
  inference, and fails loudly when SGLang has drifted from what it was written against.
- `server`: `python -m sglang.launch_server` as a child process group (the plugin arm or
  the upstream arm, chosen through SGLANG_PLUGINS), health wait, logs, clean stop.
- `client`: the native `/generate` and `/flush_cache` endpoints.
- `backend`: `SGLangBackend`, the `backends.interface.Backend` checks talk to.

Nothing here imports sglang at module import: the client and the launcher run on machines
without it, and the plugin is imported inside SGLang's own processes.
"""
