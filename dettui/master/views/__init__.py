"""Read models: the objects that routes and the push stream both send (queue pages, experiment,
trial, agent and checkpoint objects, and the stream's feeds), built from the store and the
cluster's state in the shapes of `http.shapes`."""
