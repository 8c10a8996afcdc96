"""verl on a CPU: the platform verl's registry loads (``platform``), the overrides a tiny run adds (``overrides``),
the workarounds of verl, torch and vLLM internals it needs (``patches``), and the 16-bit GEMMs chosen per CPU
(``features``, ``gemm``). Installed by ``precision_rl.verl_ext.plugin`` only when ``VERL_PLATFORM=cpu``."""
