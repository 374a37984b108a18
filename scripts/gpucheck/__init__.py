"""The GPU check's parts (scripts/gpu_check.py is the entry point): the plan and its limits
(`plan`, no torch), the report and its time limits (`report`), the seeded model and the items
(`build`), the measured sections (`sections`) and the interleaved A/B rows (`ab`)."""
