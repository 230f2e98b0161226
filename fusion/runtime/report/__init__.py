"""`hwgen report`: a run's JSON (data), its plotly figures (figures), one self-contained HTML
page (page); docs/report.md."""
