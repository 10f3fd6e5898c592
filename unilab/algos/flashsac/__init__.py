"""FlashSAC: SAC with norm-bounded residual networks, a categorical critic ensemble and few, large updates."""
