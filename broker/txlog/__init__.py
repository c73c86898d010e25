"""txlog."""
