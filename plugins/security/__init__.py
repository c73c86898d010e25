"""Built-in authentication and entitlement modules (see ``docs/security.md``)."""
