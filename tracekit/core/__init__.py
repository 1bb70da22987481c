"""The ground floor: the version, the errors, the kernel decorator and the
closed-form models. Nothing here imports any other part of tracekit."""
