"""One module per report tab: `build(ctx) -> str` (the tab's HTML body, from the Context's RunData
only) and, last, its `PAGE` declaration (viewer.page.Page); viewer/report.py lists them in tab order."""
