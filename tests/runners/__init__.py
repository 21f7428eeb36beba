"""Tests of the official runners."""
