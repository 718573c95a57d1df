"""The deploy tool: configuration rendered and changes computed in Python."""
