"""Presentation: tables for terminals and documents (charts come later)."""
