"""Qwen3.5 (llama.cpp's `qwen35`, text only) in numpy, f32, one token at a time: the math
kiln's oracle is to follow for issue 15, checked against llama.cpp's f32 golden.
Not part of kiln (numpy from PyPI; nothing builds or tests it):

  pip install numpy
  python3 tools/qwen35_reference.py ../shared/testdata/models/qwen35-tiny.gguf \
      ../shared/testdata/models/qwen35-tiny.f32dequant-kvf32-nofa.llamacpp.json

On 2026-12-02: 6/6 cases identical, every top-5 logprob within 5.1e-5 nats.
Layers: x += mixer(rmsnorm(x, attn_norm)); x += ffn(rmsnorm(x, post_attention_norm)).
Full attention (every full_attention_interval-th layer): attn_q gives per head [q, gate];
q/k RMS-normed per head, neox rope over rope.dimension_count dims (the IMROPE sections
all take the token's position for text), softmax attention, times sigmoid(gate).
Gated DeltaNet: a causal depthwise conv (the last ssm.conv_kernel - 1 inputs as state),
silu, l2-normed q and k per head (v head j reads k head j % group_count), then per v head
M = exp(g) M; d = beta (v - M^T k); M += k d^T; o = M^T q / sqrt(state_size), with
g = softplus(alpha + dt_bias) * ssm_a, beta = sigmoid; rmsnorm(o, ssm_norm) * silu(z)."""
import json, struct, sys
import numpy as np

def read_gguf(path):
    f = open(path, 'rb'); data = f.read(); o = 0
    def u(fmt):
        nonlocal o; v = struct.unpack_from(fmt, data, o); o += struct.calcsize(fmt); return v
    magic, ver, nt, nkv = u('<IIQQ')
    def s():
        n, = u('<Q'); nonlocal o; r = data[o:o + n].decode(); o += n; return r
    def val(t):
        if t in (0, 1, 7): return u('<B')[0]
        if t in (2, 3): return u('<H')[0]
        if t == 4: return u('<I')[0]
        if t == 5: return u('<i')[0]
        if t == 6: return u('<f')[0]
        if t == 8: return s()
        if t == 9:
            at, = u('<I'); n, = u('<Q'); return [val(at) for _ in range(n)]
        if t in (10, 11): return u('<Q')[0]
        if t == 12: return u('<d')[0]
    kv = {}
    for _ in range(nkv):
        k = s(); t, = u('<I'); kv[k] = val(t)
    infos = []
    for _ in range(nt):
        n = s(); nd, = u('<I'); dims = u('<%dQ' % nd); ty, = u('<I'); off, = u('<Q'); infos.append((n, dims, ty, off))
    align = kv.get('general.alignment', 32)
    base = (o + align - 1) // align * align
    ts = {}
    for n, dims, ty, off in infos:
        cnt = int(np.prod(dims))
        dt = {0: np.float32, 1: np.float16}[ty]
        a = np.frombuffer(data, dtype=dt, count=cnt, offset=base + off).astype(np.float32)
        ts[n] = a.reshape(tuple(reversed(dims)))  # numpy [ne1][ne0]
    return kv, ts

def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

def l2norm(x, eps):
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)

def silu(x): return x / (1 + np.exp(-x))
def softplus(x): return np.log1p(np.exp(x))
def sigmoid(x): return 1 / (1 + np.exp(-x))

class Model:
    def __init__(self, path):
        kv, self.t = read_gguf(path)
        a = 'qwen35.'
        g = lambda k, d=None: kv.get(a + k, d)
        self.L, self.d, self.nh, self.nkv = g('block_count'), g('embedding_length'), g('attention.head_count'), g('attention.head_count_kv')
        self.hd, self.nrot, self.base, self.eps = g('attention.key_length'), g('rope.dimension_count'), g('rope.freq_base'), g('attention.layer_norm_rms_epsilon')
        self.K, self.S, self.nk, self.nv, self.inner = g('ssm.conv_kernel'), g('ssm.state_size'), g('ssm.group_count'), g('ssm.time_step_rank'), g('ssm.inner_size')
        iv = g('full_attention_interval', 4)
        self.recr = [(i + 1) % iv != 0 for i in range(self.L)]
        self.reset()

    def reset(self):
        self.kc = [[] for _ in range(self.L)]; self.vc = [[] for _ in range(self.L)]
        conv_dim = 2 * self.nk * self.S + self.inner
        self.conv = [np.zeros((self.K - 1, conv_dim), np.float32) for _ in range(self.L)]
        self.state = [np.zeros((self.nv, self.S, self.inner // self.nv), np.float32) for _ in range(self.L)]
        self.pos = 0

    def W(self, n): return self.t[n]  # [out][in]

    def rope(self, x, p):  # x [heads][hd], neox over nrot dims
        half = self.nrot // 2
        i = np.arange(half, dtype=np.float64)
        th = p * self.base ** (-2 * i / self.nrot)
        c, s = np.cos(th).astype(np.float32), np.sin(th).astype(np.float32)
        y = x.copy(); a, b = x[:, :half], x[:, half:self.nrot]
        y[:, :half] = a * c - b * s; y[:, half:self.nrot] = a * s + b * c
        return y

    def attn(self, l, h, p):
        b = 'blk.%d.' % l; hd = self.hd
        qg = (self.W(b + 'attn_q.weight') @ h).reshape(self.nh, 2 * hd)
        q, gate = qg[:, :hd], qg[:, hd:]
        q = rmsnorm(q, self.t[b + 'attn_q_norm.weight'], self.eps)
        k = rmsnorm((self.W(b + 'attn_k.weight') @ h).reshape(self.nkv, hd), self.t[b + 'attn_k_norm.weight'], self.eps)
        v = (self.W(b + 'attn_v.weight') @ h).reshape(self.nkv, hd)
        q, k = self.rope(q, p), self.rope(k, p)
        self.kc[l].append(k); self.vc[l].append(v)
        K, V = np.stack(self.kc[l]), np.stack(self.vc[l])  # [pos][kvh][hd]
        out = np.zeros((self.nh, hd), np.float32); grp = self.nh // self.nkv
        for hh in range(self.nh):
            sc = K[:, hh // grp] @ q[hh] / np.sqrt(hd)
            w = np.exp(sc - sc.max()); w /= w.sum()
            out[hh] = w @ V[:, hh // grp]
        out = out * sigmoid(gate)
        return self.W(b + 'attn_output.weight') @ out.reshape(-1)

    def deltanet(self, l, h):
        b = 'blk.%d.' % l; S, nk, nv = self.S, self.nk, self.nv; dv = self.inner // nv
        qkv = self.W(b + 'attn_qkv.weight') @ h
        z = (self.W(b + 'attn_gate.weight') @ h).reshape(nv, dv)
        beta = sigmoid(self.W(b + 'ssm_beta.weight') @ h)
        g = softplus(self.W(b + 'ssm_alpha.weight') @ h + self.t[b + 'ssm_dt.bias']) * self.t[b + 'ssm_a']
        cw = self.t[b + 'ssm_conv1d.weight']  # [channels][K]
        win = np.concatenate([self.conv[l], qkv[None, :]], 0)  # [K][channels]
        self.conv[l] = win[1:]
        x = silu(np.sum(win.T * cw, axis=1))
        q = l2norm(x[:nk * S].reshape(nk, S), self.eps)
        k = l2norm(x[nk * S:2 * nk * S].reshape(nk, S), self.eps)
        v = x[2 * nk * S:].reshape(nv, dv)
        o = np.zeros((nv, dv), np.float32)
        for j in range(nv):
            M = self.state[l][j] * np.exp(g[j])
            kj, qj = k[j % nk], q[j % nk] / np.sqrt(S)
            u = M.T @ kj
            d = beta[j] * (v[j] - u)
            M = M + np.outer(kj, d)
            self.state[l][j] = M
            o[j] = M.T @ qj
        o = rmsnorm(o, self.t[b + 'ssm_norm.weight'], self.eps) * silu(z)
        return self.W(b + 'ssm_out.weight') @ o.reshape(-1)

    def step(self, tok):
        x = self.t['token_embd.weight'][tok].copy()
        for l in range(self.L):
            b = 'blk.%d.' % l
            h = rmsnorm(x, self.t[b + 'attn_norm.weight'], self.eps)
            x = x + (self.deltanet(l, h) if self.recr[l] else self.attn(l, h, self.pos))
            h = rmsnorm(x, self.t[b + 'post_attention_norm.weight'], self.eps)
            ff = self.W(b + 'ffn_down.weight') @ (silu(self.W(b + 'ffn_gate.weight') @ h) * (self.W(b + 'ffn_up.weight') @ h))
            x = x + ff
        self.pos += 1
        out = self.t.get('output.weight', self.t['token_embd.weight'])
        return out @ rmsnorm(x, self.t['output_norm.weight'], self.eps)

def main(model_path, golden_path):
    m = Model(model_path)
    gold = json.load(open(golden_path))
    ok = 0
    for c in gold['cases']:
        m.reset()
        for t in c['prompt_ids'][:-1]: m.step(t)
        logits = m.step(c['prompt_ids'][-1])
        ids, worst = [], 0.0
        for s in range(len(c['ids'])):
            lp = logits.astype(np.float64); lp = lp - lp.max(); lp = lp - np.log(np.exp(lp).sum())
            for tid, want in c['top5'][s]: worst = max(worst, abs(lp[tid] - want))
            nxt = int(np.argmax(logits)); ids.append(nxt)
            if nxt != c['ids'][s]: break
            logits = m.step(nxt)
        same = ids == c['ids']
        ok += same
        print('%-40r same=%s  max |dlogprob| %.2e' % (c['prompt'][:40], same, worst))
    print('%d/%d cases identical' % (ok, len(gold['cases'])))

if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
