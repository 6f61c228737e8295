"""Standalone measurement scripts that back design choices with numbers."""
