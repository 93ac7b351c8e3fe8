"""Training: the loop and its state, loss, optimizer, validation, launching (new, resumed, torchrun), fine-tuning, collectives, console output."""
