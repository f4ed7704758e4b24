"""Job lifecycle: conditions, the phase machine, failure classification, the reconcile plan."""
