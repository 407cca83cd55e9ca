"""Report: the store of audits, their history (diffs, Cold Case) and the renderers (views of
a report's stored JSON form)."""
