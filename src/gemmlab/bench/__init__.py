"""Measurement: timing discipline, peers, and the ladder benchmark."""
