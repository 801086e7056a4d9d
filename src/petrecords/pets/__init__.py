"""The pet resource: its rules, its service functions and its routes."""
