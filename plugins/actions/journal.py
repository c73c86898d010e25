"""Built-in action modules: journal (work in progress: registers nothing yet)."""
