"""admin."""
