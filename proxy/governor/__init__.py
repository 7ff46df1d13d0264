"""The size governor's engine: measuring, shaping, spilling and signing results."""
