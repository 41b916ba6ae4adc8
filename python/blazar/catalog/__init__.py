"""The model catalog and what it is made of: the ``models`` rows and their directory entries (``models``), where
their files live (``files``), model names (``names``), the weights' digests, GGUF and ggml headers, model
directories, LoRA adapters, presets and Modelfiles, and quantizing one model into another.
"""
