"""Engine lanes: which engine kinds exist, the installed engines, building them, and routing models to them."""

KINDS: tuple[str, ...] = ("llama-cpp", "mistralrs", "sglang", "sd", "whisper", "mlx")
"""Every engine kind the seed names; only llama-cpp can be built or launched so far."""
