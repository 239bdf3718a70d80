/* The peer golden driver: llama.cpp's greedy continuation and top-5 log-probabilities for
 * prompts given as token ids, in testdata's golden format (tests/util/testutil_golden.c
 * reads it). Not part of kiln's build: it links llama.cpp's libllama, which kiln never does.
 * Built for tests/data/qwen35moe-tiny-odd.llamacpp.json (the golden names the rest) with
 * ../shared/peers' llama.cpp unpacked in L:
 *
 *   cmake -S L -B L/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
 *     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
 *     -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF && cmake --build L/b --target llama
 *   gcc -O2 -c tools/peer_golden.c -I L/include -I L/ggml/include -o peer_golden.o
 *   g++ peer_golden.o -o peer_golden L/b/src/libllama.a L/b/ggml/src/libggml.a \
 *     L/b/ggml/src/libggml-cpu.a L/b/ggml/src/libggml-base.a -fopenmp -lpthread -lm
 *   peer_golden MODEL.gguf N_PREDICT < prompts   (a line of space-separated ids each)
 *
 * Each case gets a fresh context (n_ctx 1024, one batch for the prompt, f32 KV cache, flash
 * attention off, the CPU only); the whole-vocabulary log-softmax in double; the argmax
 * (first maximum) fed back; stop after N_PREDICT tokens or at an end-of-generation token
 * (not in ids, its step's top 5 kept). */
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

/* The 5 highest log-probabilities (ties: the lower id), as [[id, logprob], ...]. */
static void top5(const float *logits, int n, FILE *out) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < n; v++) mx = fmax(mx, logits[v]);
    for (int v = 0; v < n; v++) sum += exp((double)logits[v] - mx);
    double lse = mx + log(sum);
    int best[5];
    for (int k = 0; k < 5; k++) {
        best[k] = -1;
        for (int v = 0; v < n; v++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= best[j] == v;
            if (!taken && (best[k] < 0 || logits[v] > logits[best[k]])) best[k] = v;
        }
        fprintf(out, "%s[%d, %.6f]", k ? ", " : "[", best[k], (double)logits[best[k]] - lse);
    }
    fputc(']', out);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: peer_golden MODEL.gguf N_PREDICT < prompts\n");
        return 2;
    }
    int n_predict = atoi(argv[2]);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "peer_golden: cannot load %s\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int nv = llama_vocab_n_tokens(vocab);
    printf("{\"engine\": \"llama.cpp\", \"command\": \"peer_golden %s %d\", \"n_predict\": %d, \"cases\": [", argv[1],
           n_predict, n_predict);
    char line[4096];
    int n_case = 0;
    while (fgets(line, sizeof line, stdin)) {
        llama_token prompt[512];
        int np = 0;
        for (char *s = strtok(line, " \t\n"); s && np < 512; s = strtok(NULL, " \t\n")) prompt[np++] = atoi(s);
        if (!np) continue;
        struct llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 1024, cp.n_batch = 1024, cp.n_ubatch = 512, cp.n_threads = 2, cp.n_threads_batch = 2;
        cp.type_k = GGML_TYPE_F32, cp.type_v = GGML_TYPE_F32, cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        struct llama_context *ctx = llama_init_from_model(model, cp);
        if (!ctx || llama_decode(ctx, llama_batch_get_one(prompt, np))) {
            fprintf(stderr, "peer_golden: case %d: the prompt failed\n", n_case);
            return 1;
        }
        printf("%s\n{\"prompt_ids\": [", n_case ? "," : "");
        for (int i = 0; i < np; i++) printf("%s%d", i ? ", " : "", prompt[i]);
        printf("], \"top5\": [");
        llama_token ids[1024];
        int n = 0;
        const char *stop = "length";
        for (int step = 0; step < n_predict; step++) {
            const float *logits = llama_get_logits_ith(ctx, -1);
            if (step) putchar(',');
            top5(logits, nv, stdout);
            llama_token next = 0;
            for (int v = 1; v < nv; v++)
                if (logits[v] > logits[next]) next = v;
            if (llama_vocab_is_eog(vocab, next)) {
                stop = "eog";
                break;
            }
            ids[n++] = next;
            if (step + 1 < n_predict && llama_decode(ctx, llama_batch_get_one(&ids[n - 1], 1))) {
                fprintf(stderr, "peer_golden: case %d step %d failed\n", n_case, step);
                return 1;
            }
        }
        printf("], \"ids\": [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("], \"stop\": \"%s\"}", stop);
        llama_free(ctx);
        n_case++;
    }
    printf("\n]}\n");
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
