"""Built-in action modules: triggers (work in progress: registers nothing yet)."""
