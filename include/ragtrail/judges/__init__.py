"""Judges: every model verdict (label, critique rating, entailment, ...) behind one contract.

A judge names itself (name, version, role, backend, verdict type), so every stored verdict says
which judge made it; calibration measures a judge against human references, and the gate policy
lets only a judge whose latest calibration meets its bar reject anything.
"""
