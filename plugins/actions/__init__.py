"""Built-in action modules (``amps-action-on-*``, ``amps-action-if-*``, ``amps-action-do-*``), each registered
through the ``broker`` entry-point group exactly as a third-party plugin's would be."""
