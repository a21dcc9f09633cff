"""Metric helpers: host profile, package metadata, parity, and per-cell assembly."""
