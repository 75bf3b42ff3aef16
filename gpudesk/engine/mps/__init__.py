"""MPS: one control daemon per GPU (manager) and the engine's watch over them (watch)."""
