"""Built-in action modules: gates (work in progress: registers nothing yet)."""
