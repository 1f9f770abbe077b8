#!/usr/bin/env python3
"""Independent reference forward pass for dpft's logit-parity tests.

Reads a Hugging Face-format checkpoint directory (config.json + model.safetensors, parsed here
with the standard library, not with dpft's reader) and a JSON file of input ids and attention
masks, runs GPT-2, the Llama family (Llama, Qwen2/3, Mistral, Gemma, Gemma-2, Phi-3), BERT/RoBERTa or
BART in plain PyTorch (Debian python3-torch), and writes fp32
logits as JSON. Written from the architectures' definitions (HF modeling files' semantics),
independently of dpft's C++ code.

Conventions shared with dpft (they are definitions, not implementation): attention_mask 1 =
token, 0 = padding; position ids = cumsum(mask) - 1 clamped at 0; causal attention.

Usage: /usr/bin/python3 ref_forward.py CKPT_DIR INPUT.json OUTPUT.json
  INPUT.json: {"input_ids": [[...], ...], "attention_mask": [[...], ...]}
  OUTPUT.json: {"logits": [[[...V floats...] per position] per row]}
  Encoders: INPUT.json may add "token_type_ids"; OUTPUT.json has "hidden" (B, S, d),
  "embedding" (B, d: mean over mask-1 tokens, L2-normalised) and, with a head, "logits"
  ((B, num_labels) for classification, (B, S, V) for masked / causal LM heads).
  BART: INPUT.json adds "decoder_input_ids" (and "decoder_attention_mask"); OUTPUT.json has
  "encoder_hidden" (B, S, d) and the decoder's "logits" (B, T, V).
Tolerance used by tests/test_model_parity.cpp: 1e-4 absolute on fp32 logits of dpft's random
initialisation, 1e-4 relative to the largest logit on weights perturbed to larger scales.
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64}


def read_safetensors(path, keep_dtype=False):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, t = e["data_offsets"]
        buf = bytearray(raw[base + b: base + t])
        tensor = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]) if len(buf) else torch.empty(0, dtype=DTYPES[e["dtype"]])
        tensor = tensor.reshape(e["shape"])
        out[name] = tensor if keep_dtype else tensor.to(torch.float64)
    return out


def causal_padding_bias(mask):
    # mask (B, S) -> additive (B, 1, S, S); masked = -inf handled by skipping in softmax below
    B, S = mask.shape
    allowed = torch.ones(S, S, dtype=torch.bool).tril()[None, None] & mask.bool()[:, None, None, :]
    return allowed


def softmax_masked(scores, allowed):
    scores = scores.masked_fill(~allowed, float("-inf"))
    m = scores.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m) * allowed
    s = e.sum(-1, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def rms_norm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gpt2(cfg, W, ids, mask):
    def g(n):
        return W[n] if n in W else W["transformer." + n]

    d, H = cfg["n_embd"], cfg["n_head"]
    hd = d // H
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    B, S = ids.shape
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    x = g("wte.weight")[ids] + g("wpe.weight")[pos]
    allowed = causal_padding_bias(mask)
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        a = layer_norm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
        qkv = a @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")  # Conv1D: x W + b
        q, k, v = qkv.split(d, dim=-1)
        q, k, v = (t.reshape(B, S, H, hd).permute(0, 2, 1, 3) for t in (q, k, v))
        att = softmax_masked(q @ k.transpose(-1, -2) / math.sqrt(hd), allowed)
        o = (att @ v).permute(0, 2, 1, 3).reshape(B, S, d)
        x = x + o @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
        h = layer_norm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
        h = h @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias")
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
        x = x + h @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
    x = layer_norm(x, g("ln_f.weight"), g("ln_f.bias"), eps)
    head = W["lm_head.weight"] if "lm_head.weight" in W else g("wte.weight")
    return x @ head.T


def rope_frequencies(cfg, hd, pos):
    """Inverse frequencies (hd/2,) and the cos/sin scale for positions `pos` (B, S).

    Plain RoPE: theta^(-2i/hd). Llama-3 scaling (rope_type llama3): wavelengths between
    orig/high and orig/low interpolate between f and f/factor. Phi-3 longrope: f / ext[i] with
    ext = long_factor once max(pos) + 1 exceeds original_max_position_embeddings, else
    short_factor; cos and sin scaled by attention_factor or sqrt(1 + ln(s) / ln(orig)), s =
    max_position_embeddings / orig (1 when s <= 1).
    """
    # transformers >= 5 writes rope_parameters {rope_theta, rope_type, ...} instead of
    # rope_theta / rope_scaling
    rp = cfg.get("rope_parameters") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = [1.0 / (theta ** (2 * i / hd)) for i in range(hd // 2)]
    rs = cfg.get("rope_scaling") or (rp if rp.get("rope_type", "default") != "default" else None)
    kind = (rs or {}).get("rope_type", (rs or {}).get("type"))
    scale = 1.0
    if kind in ("longrope", "su"):
        orig = rs.get("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
        ext = rs["long_factor"] if int(pos.max()) + 1 > orig else rs["short_factor"]
        inv = [f / e for f, e in zip(inv, ext)]
        s = cfg["max_position_embeddings"] / orig
        scale = rs.get("attention_factor") or (math.sqrt(1 + math.log(s) / math.log(orig)) if s > 1 else 1.0)
    elif rs:
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        orig = rs["original_max_position_embeddings"]
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < orig / hi:
                out.append(f)
            elif wavelen > orig / lo:
                out.append(f / factor)
            else:
                s = (orig / wavelen - lo) / (hi - lo)
                out.append((1 - s) * f / factor + s * f)
        inv = out
    return torch.tensor(inv, dtype=torch.float64), scale


def rotate(x, pos, inv, scale=1.0):
    # x (B, H, S, hd): pairs (i, i + hd/2) rotated by angle pos * inv[i]; cos, sin times scale
    half = x.shape[-1] // 2
    ang = pos[:, None, :, None].to(torch.float64) * inv[None, None, None, :]
    c, s = torch.cos(ang) * scale, torch.sin(ang) * scale
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def activation(name, x):
    if name == "silu":
        return x * torch.sigmoid(x)
    if name in ("gelu_pytorch_tanh", "gelu_new"):  # GELU, tanh approximation
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "gelu":
        return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    raise SystemExit(f"activation {name}?")


def llama(cfg, W, ids, mask):
    """Llama, Qwen2/3, Mistral, Gemma, Gemma-2 and Phi-3, from their papers and model cards.

    Every stored bias is used (the checkpoint says which exist). Mistral: sliding window W
    (query i sees keys j > i - W). Gemma: RMSNorm times (1 + w), embeddings times sqrt(d), GeGLU
    (tanh GELU). Gemma-2: also a norm after attention and after the MLP, scores times
    query_pre_attn_scalar^-1/2 then cap*tanh(s/cap) (attn_logit_softcapping), logits likewise
    (final_logit_softcapping), sliding-window layers where layer_types says (else even layers).
    Phi-3: qkv_proj rows q|k|v, gate_up_proj rows gate|up, longrope.
    """
    t = cfg["model_type"]
    gemma = t in ("gemma", "gemma2")
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim", d // H)
    eps = cfg.get("rms_norm_eps", 1e-6)
    act = cfg.get("hidden_activation") or "gelu_pytorch_tanh" if gemma else cfg.get("hidden_act", "silu")
    B, S = ids.shape
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    inv, rscale = rope_frequencies(cfg, hd, pos)
    x = W["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * math.sqrt(d)
    causal = causal_padding_bias(mask)
    window = cfg.get("sliding_window") if t in ("mistral", "gemma2", "phi3") else None
    idx = torch.arange(S)
    near = (idx[:, None] - idx[None, :] < window)[None, None] if window else None
    types = cfg.get("layer_types") or (["sliding_attention" if l % 2 == 0 else "full_attention"
                                        for l in range(cfg["num_hidden_layers"])] if t == "gemma2" else None)
    qscale = cfg["query_pre_attn_scalar"] ** -0.5 if t == "gemma2" else hd ** -0.5
    cap = cfg.get("attn_logit_softcapping") if t == "gemma2" else None

    def norm(v, n):
        w = W[n + ".weight"]
        return rms_norm(v, 1 + w if gemma else w, eps)

    def lin(v, n):
        y = v @ W[n + ".weight"].T
        return y + W[n + ".bias"] if n + ".bias" in W else y

    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a = norm(x, p + "input_layernorm")
        if t == "phi3":
            qkv = lin(a, p + "self_attn.qkv_proj")
            q, k, v = qkv[..., :H * hd], qkv[..., H * hd:(H + Hkv) * hd], qkv[..., (H + Hkv) * hd:]
        else:
            q, k, v = (lin(a, p + "self_attn." + n) for n in ("q_proj", "k_proj", "v_proj"))
        q, k, v = q.reshape(B, S, H, hd), k.reshape(B, S, Hkv, hd), v.reshape(B, S, Hkv, hd)
        if t == "qwen3":  # Qwen3: RMSNorm over each head's query and key
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        q, k = rotate(q, pos, inv, rscale), rotate(k, pos, inv, rscale)
        local = near is not None and (types is None or types[l] == "sliding_attention")
        allowed = causal & near if local else causal
        outs = []
        for h in range(H):
            kv = h // (H // Hkv)
            sc = q[:, h:h + 1] @ k[:, kv:kv + 1].transpose(-1, -2) * qscale
            if cap:
                sc = cap * torch.tanh(sc / cap)
            outs.append(softmax_masked(sc, allowed) @ v[:, kv:kv + 1])
        o = lin(torch.cat(outs, dim=1).permute(0, 2, 1, 3).reshape(B, S, H * hd), p + "self_attn.o_proj")
        if t == "gemma2":
            x = x + norm(o, p + "post_attention_layernorm")
            h = norm(x, p + "pre_feedforward_layernorm")
        else:
            x = x + o
            h = norm(x, p + "post_attention_layernorm")
        if t == "phi3":
            gu = lin(h, p + "mlp.gate_up_proj")
            gate, up = gu[..., :gu.shape[-1] // 2], gu[..., gu.shape[-1] // 2:]
        else:
            gate, up = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        m = lin(activation(act, gate) * up, p + "mlp.down_proj")
        x = x + (norm(m, p + "post_feedforward_layernorm") if t == "gemma2" else m)
    x = norm(x, "model.norm")
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    logits = x @ head.T
    fcap = cfg.get("final_logit_softcapping") if t == "gemma2" else None
    return fcap * torch.tanh(logits / fcap) if fcap else logits


def encoder(cfg, W, ids, mask, types):
    """BERT / RoBERTa (post-LN encoder) from the papers' and HF's definitions: returns the last
    hidden states (B, S, d) and the head's output (classification logits (B, L), token logits
    (B, S, V), or None for a base model)."""
    roberta = cfg["model_type"] == "roberta"
    arch = (cfg.get("architectures") or ["RobertaModel" if roberta else "BertModel"])[0]
    pre = "roberta." if roberta else "bert."
    if not any(k.startswith(pre) for k in W):
        pre = ""

    def lin(t, n):
        return t @ W[n + ".weight"].T + W[n + ".bias"]

    def ln(t, n):
        return layer_norm(t, W[n + ".weight"], W[n + ".bias"], cfg.get("layer_norm_eps", 1e-12))

    def gelu(t):
        return 0.5 * t * (1 + torch.erf(t / math.sqrt(2.0)))

    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = d // H
    B, S = ids.shape
    if roberta:
        pad = cfg.get("pad_token_id", 1)
        real = (ids != pad).long()
        pos = torch.cumsum(real, 1) * real + pad
    else:
        pos = torch.arange(S)[None, :].expand(B, S)
    e = pre + "embeddings."
    x = W[e + "word_embeddings.weight"][ids] + W[e + "position_embeddings.weight"][pos] + \
        W[e + "token_type_embeddings.weight"][types]
    x = ln(x, e + "LayerNorm")
    allowed = mask.bool()[:, None, None, :].expand(B, 1, S, S)
    if cfg.get("is_decoder", False):
        allowed = allowed & torch.ones(S, S, dtype=torch.bool).tril()[None, None]
    for l in range(cfg["num_hidden_layers"]):
        p = f"{pre}encoder.layer.{l}."
        q, k, v = (lin(x, p + "attention.self." + n).reshape(B, S, H, hd).permute(0, 2, 1, 3)
                   for n in ("query", "key", "value"))
        att = softmax_masked(q @ k.transpose(-1, -2) / math.sqrt(hd), allowed)
        o = (att @ v).permute(0, 2, 1, 3).reshape(B, S, d)
        x = ln(x + lin(o, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = gelu(lin(x, p + "intermediate.dense"))
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
    out = None
    if arch.endswith("ForSequenceClassification"):
        h0 = x[:, 0]
        if roberta:
            out = lin(torch.tanh(lin(h0, "classifier.dense")), "classifier.out_proj")
        else:
            out = lin(torch.tanh(lin(h0, pre + "pooler.dense")), "classifier")
    elif arch.endswith("MaskedLM") or arch in ("BertLMHeadModel", "RobertaForCausalLM"):
        h = "lm_head." if roberta else "cls.predictions."
        t = "" if roberta else "transform."
        y = gelu(lin(x, h + t + "dense"))
        y = ln(y, h + ("layer_norm" if roberta else "transform.LayerNorm"))
        dec = W.get(h + "decoder.weight", W[e + "word_embeddings.weight"])
        out = y @ dec.T + W[h + "bias"]
    return x, out


def bart(cfg, W, src, src_mask, tgt, tgt_mask):
    """BART (post-LN encoder-decoder) from the paper's and HF's definitions: returns the encoder's
    last hidden states (B, S, d) and the decoder's token logits (B, T, V). Positions are
    arange(T) + 2 (BART's offset), whatever the padding; the lm_head is the shared embedding
    table plus final_logits_bias."""
    pre = "model." if any(k.startswith("model.") for k in W) else ""
    emb = None
    for n in (pre + "shared.weight", pre + "encoder.embed_tokens.weight", "lm_head.weight"):
        if n in W:
            emb = W[n]
            break
    d, H = cfg["d_model"], cfg["encoder_attention_heads"]
    hd = d // H
    scale = math.sqrt(d) if cfg.get("scale_embedding", False) else 1.0

    def lin(t, n):
        return t @ W[n + ".weight"].T + W[n + ".bias"]

    def ln(t, n):
        return layer_norm(t, W[n + ".weight"], W[n + ".bias"], 1e-5)

    def act(t):
        name = cfg.get("activation_function", "gelu")
        if name == "gelu":
            return 0.5 * t * (1 + torch.erf(t / math.sqrt(2.0)))
        if name == "relu":
            return torch.relu(t)
        raise SystemExit(f"activation {name} not in this reference")

    def attention(x, kv, allowed, p):
        B, Tq, Tk = x.shape[0], x.shape[1], kv.shape[1]
        q = (lin(x, p + ".q_proj") * hd ** -0.5).reshape(B, Tq, H, hd).permute(0, 2, 1, 3)
        k = lin(kv, p + ".k_proj").reshape(B, Tk, H, hd).permute(0, 2, 1, 3)
        v = lin(kv, p + ".v_proj").reshape(B, Tk, H, hd).permute(0, 2, 1, 3)
        o = softmax_masked(q @ k.transpose(-1, -2), allowed) @ v
        return lin(o.permute(0, 2, 1, 3).reshape(B, Tq, d), p + ".out_proj")

    def embed(ids, stack):
        B, T = ids.shape
        pos = torch.arange(T)[None, :].expand(B, T) + 2
        x = emb[ids] * scale + W[f"{pre}{stack}.embed_positions.weight"][pos]
        return ln(x, f"{pre}{stack}.layernorm_embedding")

    B, S = src.shape
    T = tgt.shape[1]
    x = embed(src, "encoder")
    src_allowed = src_mask.bool()[:, None, None, :]
    for l in range(cfg["encoder_layers"]):
        p = f"{pre}encoder.layers.{l}"
        x = ln(x + attention(x, x, src_allowed.expand(B, 1, S, S), p + ".self_attn"),
               p + ".self_attn_layer_norm")
        x = ln(x + lin(act(lin(x, p + ".fc1")), p + ".fc2"), p + ".final_layer_norm")
    enc = x
    y = embed(tgt, "decoder")
    self_allowed = torch.ones(T, T, dtype=torch.bool).tril()[None, None] & \
        tgt_mask.bool()[:, None, None, :]
    for l in range(cfg["decoder_layers"]):
        p = f"{pre}decoder.layers.{l}"
        y = ln(y + attention(y, y, self_allowed, p + ".self_attn"), p + ".self_attn_layer_norm")
        y = ln(y + attention(y, enc, src_allowed.expand(B, 1, T, S), p + ".encoder_attn"),
               p + ".encoder_attn_layer_norm")
        y = ln(y + lin(act(lin(y, p + ".fc1")), p + ".fc2"), p + ".final_layer_norm")
    logits = y @ emb.T + W.get("final_logits_bias", torch.zeros(1, emb.shape[0]))
    return enc, logits


def main():
    ckpt, inp, outp = sys.argv[1:4]
    cfg = json.load(open(f"{ckpt}/config.json"))
    W = read_safetensors(f"{ckpt}/model.safetensors")
    data = json.load(open(inp))
    ids = torch.tensor(data["input_ids"], dtype=torch.int64)
    mask = torch.tensor(data.get("attention_mask", [[1] * ids.shape[1]] * ids.shape[0]), dtype=torch.int64)
    with torch.no_grad():
        if cfg["model_type"] == "gpt2":
            logits = gpt2(cfg, W, ids, mask)
        elif cfg["model_type"] in ("llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "phi3"):
            logits = llama(cfg, W, ids, mask)
        elif cfg["model_type"] == "bart":
            tgt = torch.tensor(data["decoder_input_ids"], dtype=torch.int64)
            tmask = torch.tensor(data.get("decoder_attention_mask",
                                          [[1] * tgt.shape[1]] * tgt.shape[0]), dtype=torch.int64)
            enc, logits = bart(cfg, W, ids, mask, tgt, tmask)
            json.dump({"encoder_hidden": enc.to(torch.float32).tolist(),
                       "logits": logits.to(torch.float32).tolist()}, open(outp, "w"))
            return
        elif cfg["model_type"] in ("bert", "roberta"):
            types = torch.tensor(data.get("token_type_ids", torch.zeros_like(ids).tolist()),
                                 dtype=torch.int64)
            hidden, logits = encoder(cfg, W, ids, mask, types)
            m = mask[:, :, None].to(torch.float64)
            mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            emb = mean / mean.norm(dim=1, keepdim=True).clamp(min=1e-12)
            res = {"hidden": hidden.to(torch.float32).tolist(),
                   "embedding": emb.to(torch.float32).tolist()}
            if logits is not None:
                res["logits"] = logits.to(torch.float32).tolist()
            json.dump(res, open(outp, "w"))
            return
        else:
            raise SystemExit(f"unsupported model_type {cfg['model_type']}")
    json.dump({"logits": logits.to(torch.float32).tolist()}, open(outp, "w"))


if __name__ == "__main__":
    main()
