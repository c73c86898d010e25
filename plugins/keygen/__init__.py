"""keygen."""
