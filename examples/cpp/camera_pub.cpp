/*
 * camera_pub_cpp: camera_pub.c in C++ (include/ferry/ferry.hpp). Loans a 1280x720 rgb8 image,
 * draws into it, stamps it and publishes it at 30 fps; the frame is written once, in shared
 * memory, and never copied.
 *
 *   camera_pub_cpp TOPIC FRAMES        e.g. camera_pub_cpp /camera/front/image_raw 300
 *
 * Waits up to 10 s for a subscriber before the first frame. FERRY_DIR, when set, is the domain
 * directory's root (as for the ferry CLI). SIGINT and SIGTERM end the loop, and the handles'
 * destructors remove the publisher's socket and status file on the way out of main.
 */
#include <ferry/ferry.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

constexpr uint32_t width = 1280, height = 720;
volatile std::sig_atomic_t stop = 0;

// A moving gradient: every row one grey level, shifted by one per frame.
void draw(ferry::ImageLoan &img, unsigned frame)
{
    const ferry_image_header &h = img.header();
    ferry::span<std::byte> px = img.data();
    for (uint32_t y = 0; y < h.height; y++)
        std::memset(px.data() + std::size_t{y} * h.step, int((y + frame) & 0xff), h.width * 3u);
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: camera_pub_cpp TOPIC FRAMES\n");
        return 2;
    }
    const unsigned frames = unsigned(std::strtoul(argv[2], nullptr, 10));
    std::signal(SIGINT, [](int) { stop = 1; });
    std::signal(SIGTERM, [](int) { stop = 1; });

    try {
        // dir nullptr: the default, /dev/shm/ferry-<uid>
        ferry::Node node(ferry::NodeOptions().dir(std::getenv("FERRY_DIR")).name("camera_pub"));
        ferry::Publisher pub(node, argv[1], ferry::image_type);
        // Frames published before anyone listens go nowhere; the wait also accepts subscribers.
        if (!pub.wait_subscribers(1, std::chrono::seconds(10))) {
            std::fprintf(stderr, "camera_pub_cpp: no subscriber within 10 s\n");
            return 1;
        }

        auto next = std::chrono::steady_clock::now();
        for (unsigned i = 0; i < frames && !stop; i++) {
            ferry::ImageLoan img = pub.loan_image(width, height, "rgb8"); // minimum step
            draw(img, i);
            img.stamp(ferry::stamp_now()).frame_id("camera");
            pub.publish(std::move(img)); // the loan is ferry's now
            next += std::chrono::nanoseconds(1000000000 / 30);
            std::this_thread::sleep_until(next);
        }

        ferry_publisher_stats st = pub.stats();
        std::printf("camera_pub_cpp: published %llu frames, %llu dropped, %llu bytes copied\n",
                    (unsigned long long)st.published, (unsigned long long)st.dropped,
                    (unsigned long long)st.bytes_copied);
    } catch (const ferry::error &e) { // the handles are gone already: nothing is left behind
        std::fprintf(stderr, "camera_pub_cpp: %s\n", e.what());
        return 1;
    }
    return 0;
}
