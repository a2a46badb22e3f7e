"""pgflow's dashboard: admin pages, the range-bar timeline and the insights window."""
