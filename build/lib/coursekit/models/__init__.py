"""Small, readable models the chapters build and train (and, later, port weights into)."""
