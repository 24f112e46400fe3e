"""SGLang as a backend: the plugin that carries det-suite's kernel, a server process, and its HTTP client (issue 14)."""
