"""Built-in action modules: files (work in progress: registers nothing yet)."""
