"""One module per report tab; each exposes `build(ctx) -> str`, the tab's HTML body."""
