"""messagetypes."""
