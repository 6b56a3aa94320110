"""Task folders made and checked: listed, scaffolded from the template (task_template.py) and
checked (task_folders.py), and a starting kernel written from torch.compile
(compiled_start.py)."""
