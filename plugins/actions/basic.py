"""Built-in action modules: basic (work in progress: registers nothing yet)."""
