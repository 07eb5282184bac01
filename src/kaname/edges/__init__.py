"""The APIs at the edge: each module turns its wire body into the one request inside
(`formats.request.TurnRequest`) and a turn's result into its wire body and stream events.
Nothing below this package knows an API's wire shape."""
