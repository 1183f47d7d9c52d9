"""Residual channels: per-channel update energy and its statistics given a channel set (issue 24)."""
