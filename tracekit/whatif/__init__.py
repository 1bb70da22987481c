"""The what-if engine (issue #26): predictions under a change of one or more factors."""
