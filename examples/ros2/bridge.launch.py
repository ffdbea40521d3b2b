"""Carries this host's ROS 2 topics to ROS 2 nodes on other hosts, and theirs here.

rmw_ferry_cpp is host-local: nodes on this host that run with RMW_IMPLEMENTATION=rmw_ferry_cpp
talk through shared memory only. This launch file starts `ferry bridge` beside them: every topic
they publish goes out to DDS as rmw_cyclonedds_cpp (the ROS 2 default) sends it (topic rt/NAME,
type pkg::msg::dds_::Name_, plain CDR), and every DDS writer on another host comes in, so the
nodes there (any DDS RMW) and the nodes here see each other's topics. Services and actions stay
on their host. docs/ros2.md ("Across hosts") says what is carried and how.

    ros2 launch bridge.launch.py
    ros2 launch bridge.launch.py topics:='/camera/*' dds_config:=file:///etc/ferry/dds.xml

Include it from a robot's own launch file with IncludeLaunchDescription. The DDS domain is
ROS_DOMAIN_ID, as for the nodes; the ferry domain and directory are the nodes' (FERRY_DOMAIN,
FERRY_DIR, else rmw_ferry_cpp's defaults).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.substitutions import LaunchConfiguration


def _bridge(context):
    arg = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    cmd = [arg('ferry'), 'bridge']
    for pattern in arg('topics').split():
        cmd += ['--topic', pattern]
    if arg('direction'):
        cmd += ['--direction', arg('direction')]
    if arg('dds_config'):
        cmd += ['--config', arg('dds_config')]
    cmd += arg('extra_args').split()
    return [ExecuteProcess(cmd=cmd, name='ferry_bridge', output='screen',
                           sigterm_timeout='10')]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('ferry', default_value='ferry',
                              description='the ferry command (a path where it is not on PATH)'),
        DeclareLaunchArgument('topics', default_value='*',
                              description='topic patterns to carry, separated by spaces '
                                          '(fnmatch on names with their leading /)'),
        DeclareLaunchArgument('direction', default_value='both',
                              description='out (this host to DDS), in, or both'),
        DeclareLaunchArgument('dds_config', default_value='',
                              description='extra Cyclone DDS configuration: XML or file:// URIs '
                                          '(interfaces, peers)'),
        DeclareLaunchArgument('extra_args', default_value='',
                              description='more ferry bridge options, e.g. --stats --depth 16'),
        OpaqueFunction(function=_bridge),
    ])
