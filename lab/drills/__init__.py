"""Fault drills, the chaos soak and the benchmark (``manage.py drill|soak|bench``).

They all run real worker processes in a scratch database cloned on the configured
PostgreSQL server and a scratch Redis database (``lab.drills.sandbox``), so a drill
never touches the deployment's own runs or queue.
"""
