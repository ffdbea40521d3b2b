/*
 * Image files for `ferry pub --from`: binary PPM and PGM (read here), PNG (libpng's simplified
 * API) and JPEG (libturbojpeg), each decoded once into packed 8-bit rows. The format is told by
 * the file's first bytes, not its name. PNG and JPEG are built only when CMake found their
 * libraries (FERRY_HAVE_PNG, FERRY_HAVE_TURBOJPEG); otherwise such a file is refused with a
 * message saying so.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef FERRY_HAVE_PNG
#include <png.h>
#endif
#ifdef FERRY_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

/* Largest file read: far beyond any camera frame, small enough to keep in memory. */
#define FILE_MAX ((size_t)1 << 30)

static int read_file(const char *cmd, const char *path, unsigned char **out, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t used = 0, cap = 0;

    if (f == NULL) {
        return cli_fail(cmd, 1, "--from %s: %s", path, strerror(errno));
    }
    for (;;) {
        size_t n;

        if (used == cap) {
            unsigned char *grown;

            cap = cap ? cap * 2 : 65536;
            if (cap > FILE_MAX + 1)
                cap = FILE_MAX + 1;
            if (used == cap || (grown = realloc(buf, cap)) == NULL) {
                free(buf);
                fclose(f);
                return cli_fail(cmd, 1, "--from %s: %s", path,
                                used == cap ? "larger than 1 GiB" : "out of memory");
            }
            buf = grown;
        }
        n = fread(buf + used, 1, cap - used, f);
        used += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        int saved = errno;

        free(buf);
        fclose(f);
        return cli_fail(cmd, 1, "--from %s: %s", path, strerror(saved));
    }
    fclose(f);
    *out = buf;
    *size = used;
    return 0;
}

static bool set_pixels(cli_image_file *img, uint32_t width, uint32_t height, uint32_t channels)
{
    static const char *const encodings[5] = {NULL, "mono8", NULL, "rgb8", "rgba8"};

    img->width = width;
    img->height = height;
    img->encoding = encodings[channels];
    img->size = (size_t)width * height * channels;
    img->pixels = malloc(img->size ? img->size : 1);
    return img->pixels != NULL;
}

/* Netpbm P5 (PGM) and P6 (PPM), maxval 255: whitespace and # comments between the fields. */
static bool pnm_number(const unsigned char *b, size_t n, size_t *at, uint32_t *out)
{
    uint64_t v = 0;
    size_t digits = 0;

    for (;;) {
        while (*at < n && (b[*at] == ' ' || b[*at] == '\t' || b[*at] == '\n' || b[*at] == '\r'))
            (*at)++;
        if (*at < n && b[*at] == '#') {
            while (*at < n && b[*at] != '\n')
                (*at)++;
            continue;
        }
        break;
    }
    while (*at < n && b[*at] >= '0' && b[*at] <= '9' && v <= UINT32_MAX) {
        v = v * 10 + (uint64_t)(b[(*at)++] - '0');
        digits++;
    }
    if (digits == 0 || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

static int load_pnm(const char *cmd, const char *path, const unsigned char *b, size_t n,
                    cli_image_file *img)
{
    uint32_t channels = b[1] == '6' ? 3 : 1, width, height, maxval;
    size_t at = 2;

    if (!pnm_number(b, n, &at, &width) || !pnm_number(b, n, &at, &height) ||
        !pnm_number(b, n, &at, &maxval) || at >= n || width == 0 || height == 0) {
        return cli_fail(cmd, 1, "--from %s: not a valid PPM or PGM header", path);
    }
    if (maxval != 255) {
        return cli_fail(cmd, 1, "--from %s: maxval %u; only 8-bit files (maxval 255) are read",
                        path, (unsigned)maxval);
    }
    at++; /* the one whitespace byte that ends the header */
    if ((uint64_t)width * height * channels > n - at) {
        return cli_fail(cmd, 1,
                        "--from %s: truncated: %ux%u pixels need %llu bytes, the file "
                        "has %zu",
                        path, (unsigned)width, (unsigned)height,
                        (unsigned long long)width * height * channels, n - at);
    }
    if (!set_pixels(img, width, height, channels)) {
        return cli_fail(cmd, 1, "--from %s: out of memory", path);
    }
    memcpy(img->pixels, b + at, img->size);
    return 0;
}

static int load_png(const char *cmd, const char *path, const unsigned char *b, size_t n,
                    cli_image_file *img)
{
#ifdef FERRY_HAVE_PNG
    png_image im;
    uint32_t channels;

    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, b, n))
        return cli_fail(cmd, 1, "--from %s: %s", path, im.message);
    /* Grey stays mono8 and colour rgb8; any transparency (grey too) makes it rgba8. */
    if (im.format & PNG_FORMAT_FLAG_ALPHA) {
        im.format = PNG_FORMAT_RGBA;
        channels = 4;
    } else if (im.format & PNG_FORMAT_FLAG_COLOR) {
        im.format = PNG_FORMAT_RGB;
        channels = 3;
    } else {
        im.format = PNG_FORMAT_GRAY;
        channels = 1;
    }
    if (!set_pixels(img, im.width, im.height, channels)) {
        png_image_free(&im);
        return cli_fail(cmd, 1, "--from %s: out of memory", path);
    }
    /* On failure the read frees what it holds itself. */
    if (!png_image_finish_read(&im, NULL, img->pixels, 0, NULL))
        return cli_fail(cmd, 1, "--from %s: %s", path, im.message);
    return 0;
#else
    (void)b;
    (void)n;
    (void)img;
    return cli_fail(cmd, 2,
                    "--from %s: PNG files are not supported in this build (building "
                    "with libpng-dev adds them)",
                    path);
#endif
}

#ifdef FERRY_HAVE_TURBOJPEG
static int jpeg_fail(const char *cmd, const char *path, tjhandle tj)
{
    int status = cli_fail(cmd, 1, "--from %s: %s", path, tjGetErrorStr2(tj));

    tjDestroy(tj);
    return status;
}
#endif

static int load_jpeg(const char *cmd, const char *path, const unsigned char *b, size_t n,
                     cli_image_file *img)
{
#ifdef FERRY_HAVE_TURBOJPEG
    int width, height, subsamp, colorspace;
    tjhandle tj = tjInitDecompress();
    bool grey;

    if (tj == NULL)
        return cli_fail(cmd, 1, "--from %s: %s", path, tjGetErrorStr2(NULL));
    if (tjDecompressHeader3(tj, b, (unsigned long)n, &width, &height, &subsamp, &colorspace) != 0)
        return jpeg_fail(cmd, path, tj);
    grey = colorspace == TJCS_GRAY;
    if (!set_pixels(img, (uint32_t)width, (uint32_t)height, grey ? 1 : 3)) {
        tjDestroy(tj);
        return cli_fail(cmd, 1, "--from %s: out of memory", path);
    }
    if (tjDecompress2(tj, b, (unsigned long)n, img->pixels, width, 0, height,
                      grey ? TJPF_GRAY : TJPF_RGB, 0) != 0)
        return jpeg_fail(cmd, path, tj);
    tjDestroy(tj);
    return 0;
#else
    (void)b;
    (void)n;
    (void)img;
    return cli_fail(cmd, 2,
                    "--from %s: JPEG files are not supported in this build (building "
                    "with libturbojpeg0-dev adds them)",
                    path);
#endif
}

int cli_image_load(const char *cmd, const char *path, cli_image_file *img)
{
    static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char *b = NULL;
    size_t n = 0;
    int status;

    memset(img, 0, sizeof *img);
    status = read_file(cmd, path, &b, &n);
    if (status != 0)
        return status;
    if (n >= 3 && b[0] == 'P' && (b[1] == '5' || b[1] == '6'))
        status = load_pnm(cmd, path, b, n, img);
    else if (n >= sizeof png_magic && memcmp(b, png_magic, sizeof png_magic) == 0)
        status = load_png(cmd, path, b, n, img);
    else if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        status = load_jpeg(cmd, path, b, n, img);
    else
        status = cli_fail(cmd, 1, "--from %s: not a PNG, JPEG, PPM (P6) or PGM (P5) file", path);
    free(b);
    if (status != 0)
        cli_image_file_free(img);
    return status;
}

void cli_image_file_free(cli_image_file *img)
{
    free(img->pixels);
    memset(img, 0, sizeof *img);
}
