"""The compute agent: runs beside the inference engine, measures each request, signs and ships records.

It never imports Django; it shares only the record format (`treemeter_records`) with the platform.
"""
