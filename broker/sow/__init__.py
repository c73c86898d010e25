"""State of the World: SOW topics, their key generators and storage engines."""
