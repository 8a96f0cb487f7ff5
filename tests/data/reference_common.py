"""Shared by the reference scripts: every parameter's gradient, torch.optim.AdamW steps with clipping, and
the tokenizer test strings."""
import torch


def gradients(params):
    """grad.<name> for every named parameter, after a backward."""
    return {"grad." + name: p.grad.detach().clone().contiguous() for name, p in params.items()}


def adamw_trajectory(model, loss_of, adamw, grad_clip, steps):
    """The loss before each of `steps` AdamW steps (with global-norm clipping) and after the last, and each
    step's gradient norm, as float32 tensors."""
    opt = torch.optim.AdamW(model.parameters(), lr=adamw["lr"], betas=(adamw["beta1"], adamw["beta2"]),
                            eps=adamw["eps"], weight_decay=adamw["weight_decay"])
    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        _, loss = loss_of(model)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)))
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        losses.append(float(loss_of(model)[1]))
    return torch.tensor(losses, dtype=torch.float32), torch.tensor(norms, dtype=torch.float32)


# What the tokenizer references encode: words, contractions, whitespace runs, newlines, digits,
# punctuation, case, accents, and the empty edges.
TOKENIZER_TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "It's what you'll do, isn't it? We've, they're, I'd, I'm.",
    "  leading spaces and   inner   runs  ",
    "line one\nline two\n\n\nafter blank lines\n",
    "tabs\tand\ttabs\t\tdouble",
    "numbers 12345 and 3.14159, 2026-11-22",
    "punctuation!!! ??? ... --- (parens) [brackets] {braces}",
]
