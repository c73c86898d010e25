"""Built-in action modules: sow (work in progress: registers nothing yet)."""
