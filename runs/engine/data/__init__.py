"""Run data: artifacts, model input assembly, message drafts, the thread inbox, backup
and restore."""
