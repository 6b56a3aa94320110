"""What a person sees: the live views of a search, a sweep and a knob study, their closing
tables, and the way every table states a speedup and fits a console."""
