"""Shared by the reference scripts: every parameter's gradient, torch.optim.AdamW steps with clipping, a causal
LM's whole reference (batch, logits, loss, gradients, AdamW trajectory), and the tokenizer test strings."""
import torch
import torch.nn.functional as F


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


def causal_lm_reference(model, params, vocab_size, batch, seq, seed, adamw, grad_clip, steps):
    """A random batch of next-token targets drawn from `seed`, the model's logits, loss and every gradient on it,
    then the loss and gradient norm around each of `steps` AdamW steps: what the golden tests read."""
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (batch, seq), generator=gen)
    targets = torch.randint(0, vocab_size, (batch, seq), generator=gen)

    def loss_of(m):
        logits = m(input_ids).logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    logits, loss = loss_of(model)
    loss.backward()
    ref = {
        "input_ids": input_ids.to(torch.int32),
        "targets": targets.to(torch.int32),
        "logits": logits.detach().contiguous(),
        "loss": loss.detach().reshape(1),
    }
    ref.update(gradients(params))
    ref["adamw_losses"], ref["adamw_grad_norms"] = adamw_trajectory(model, loss_of, adamw, grad_clip, steps)
    return ref


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
